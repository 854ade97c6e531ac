"""`starfish preflight`: an operator's checks of its host before it starts its service."""
