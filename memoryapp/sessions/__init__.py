"""Channel sessions (004 `SessionManager`): a person's conversation with an agent on one channel
(user + channel type + channel id + agent) mapped onto one thread, opened by get-or-create."""
