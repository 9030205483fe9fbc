"""Results: storage of runs, the entry schema, comparison and the regression gate's
decision, merging, imports, tables, plots, reports."""
