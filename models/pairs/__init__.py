"""Pairs: the catalog of draft/target pairs (pairs.json), where their files are and how they are
fetched from the Hub, converted and compared, and the vocabulary translation built at load time.
Nothing here runs a model."""
