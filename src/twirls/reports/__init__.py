"""Paper numbers, the results contract, and rendering of tables and the report index."""
