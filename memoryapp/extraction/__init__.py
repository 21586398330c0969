"""Extraction of memory items from threads (004 MemoryExtractor): extractor, service, schedule."""
