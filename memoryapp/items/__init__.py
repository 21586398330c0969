"""Memory items and facts: their rules, writes (services) and reads (selectors), and evidence."""
