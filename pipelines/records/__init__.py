"""The data model every other room reads and writes: the rollout-log schema and its success rule
(``schema``), the Searcher's tag grammar (``tags``), the metrics (``metrics``), a verl prompt row
(``prompt_row``), golden pages (``golden``), row checks (``row_checks``), review decisions
(``decisions``) and the one CSV cell escape (``csv_cells``); with the two helpers every room above
uses: ``lazy`` (heavy libraries loaded at first use) and ``progress``.

The bottom floor of ``ddai.pipelines``: it imports no other room. Import the modules by name
(``from ddai.pipelines.records import schema``); this package re-exports nothing.
"""
