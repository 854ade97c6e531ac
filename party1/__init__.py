"""party1: entry point and default configuration of Starfish's helper (follows and verifies the leader)."""
