from tests.kit.crypto import encrypted

__all__ = ["encrypted"]
