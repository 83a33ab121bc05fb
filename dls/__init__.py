"""The pure DLS core: content space, labels, predicates, mapping, Bloom filters."""
