"""The decorators: each imports the engine, never another decorator."""
