"""The JetStream meta group of a hub cluster (issue 22 items 5-6): hub/meta/DESIGN.md."""
