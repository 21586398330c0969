"""Knowledge documents: texts an operator or an agent adds, chunked, embedded and searched apart from memory."""
