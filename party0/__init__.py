"""party0: entry point and default configuration of Starfish's leader (orders rounds, serves the admin API)."""
