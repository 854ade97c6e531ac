#!/usr/bin/env bash
# Install one operator's rendered bundle on its host (run as root):
#   deploy/install.sh ROLE BUNDLE
# ROLE is party0, party1 or dealer; BUNDLE is the directory `starfish deploy render` wrote
# (ROLE.toml, ROLE.nft, starfish-ROLE.service, certs/ with this host's keys and, once the CA
# has signed them, the certificates and ca.pem). It creates the service user, gives it the
# keys (0600) in a 0700 directory, creates the data directory (0700), and installs config,
# firewall and unit. Re-running it installs renewed certificates the same way.
# STARFISH_ROOT (default /) installs under another root, SERVICE_USER (default starfish)
# names the user; the namespace test uses both.
set -euo pipefail
role=${1:?usage: install.sh ROLE BUNDLE}
bundle=${2:?usage: install.sh ROLE BUNDLE}
root=${STARFISH_ROOT:-/}
user=${SERVICE_USER:-starfish}
case "$role" in party0|party1|dealer) ;; *) echo "install.sh: unknown role $role" >&2; exit 2 ;; esac
etc="$root/etc/starfish"
var="$root/var/lib/starfish"
units="$root/etc/systemd/system"

if ! id -u "$user" >/dev/null 2>&1; then
  useradd --system --home-dir /var/lib/starfish --shell /usr/sbin/nologin "$user"
fi
group=$(id -gn "$user")
install -d -m 0755 "$etc" "$units"
install -d -m 0700 -o "$user" -g "$group" "$etc/certs" "$var"
if [ "$role" != dealer ]; then
  install -d -m 0700 -o "$user" -g "$group" "$var/$role"
fi
install -m 0640 -o root -g "$group" "$bundle/$role.toml" "$etc/$role.toml"
install -m 0644 "$bundle/$role.nft" "$etc/$role.nft"
install -m 0644 "$bundle/starfish-$role.service" "$units/starfish-$role.service"
for key in "$bundle"/certs/*.key; do
  [ -e "$key" ] || continue
  install -m 0600 -o "$user" -g "$group" "$key" "$etc/certs/$(basename "$key")"
  rm -f "$key"  # one copy of a private key on the host: the service's
done
for cert in "$bundle"/certs/*.pem; do
  [ -e "$cert" ] || continue
  install -m 0644 -o "$user" -g "$group" "$cert" "$etc/certs/$(basename "$cert")"
done
if [ "$root" = / ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "installed $role under $root; next: starfish preflight --config $etc/$role.toml --user $user"
