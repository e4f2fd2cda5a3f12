"""docs/benchmarks.md from one run: tables.py, gpu_tables.py, facts.py, plot.py, template.md (see make_report.py)."""
