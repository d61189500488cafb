"""RAFT for the hub: a sans-IO node (node.py), its durable log (log_store.py); see DESIGN.md."""
