"""Domain operations, one module per noun. They speak SQL and domain terms, never a framework."""
