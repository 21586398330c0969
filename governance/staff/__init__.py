"""What every staff page shares, in memoryapp's admin and governance's alike.

- roles: the staff roles (groups and their permissions), kept on every migrate;
- lists: list cells that fit, full-width lists, the filter of a moment column;
- progress: a job run's progress (text, bar, the state the pages' script redraws);
- consequences: the dry run of an irreversible action, counted by kind, then its real run;
- confirm: the confirmation page that shows those consequences before the action runs.
"""
