"""Encryption at rest: the one place that knows keys and ciphers (docs/security.md, "Encryption at rest").

- keyring: the master keys from MEMORY_ENCRYPTION_KEYS (the first encrypts, all decrypt);
- envelope: data keys per (agent, person), wrapped by a master key; `data_key_destroy` shreds one;
  key sets (a key derived from several people's) for rows naming or holding several people;
- sealing: the value format `enc:v1:<data key id>:<base64 nonce+ciphertext>` (AES-256-GCM);
- fields: model fields that seal on save and open on load, so the models are the boundary;
- blind: keyed hashes of normalised words, the keyword index when encryption is on;
- startup: the refusal to run on a database whose keys are missing or wrong.

A leaf of governance: it imports nothing of memoryapp, so every model may use its fields.
"""
