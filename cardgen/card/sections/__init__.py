"""The card's sections, a module each: every one turns part of an analysis into the cells, tables and words its
part of the template prints (pure). :mod:`cardgen.card.context` assembles them into the template's context.

- head: title, banner, front matter, date          - main: the three headlines
- frames: analysis tables printed as they are       - interactivity: throughput against interactivity
- generation: a table per prompt / output pair      - point_text: a point's precision and stop, in words
- kv_cache, datasets                                 - server_vs_client, parameters, launch, gpu, scenarios
- modelled_error: a modelled card's expected error  - figures: which figure files the card links

A kind whose section is its own keeps it in its folder (:mod:`cardgen.card.kindparts`).
"""
