"""Immutable flow plans: the nodes the builder records and the compiler reads."""
