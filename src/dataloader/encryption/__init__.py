"""Encryption at rest of payloads: the key status and the rotation that re-encrypts what is stored
under an old key (docs/security.md "Encryption at rest"). The envelope and the keys are
model/payload_crypto.py's; the statements storage/encryption_repository.py's."""
