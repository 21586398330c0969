"""Forgetting: deleting and redacting threads and entries, with everything memory derived from them."""
