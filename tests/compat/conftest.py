"""The compatibility harness' own tests live here; its shim and site modules run only inside run.py."""

collect_ignore = ["shim", "site", "run.py"]
