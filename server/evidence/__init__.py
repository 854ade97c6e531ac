"""Evidence of erasure: the parties' signing identities, the certificate statement, the
checks a party makes before signing, and party0's assembly of a job's certificate."""
