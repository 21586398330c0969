"""Admin pages of this area."""
