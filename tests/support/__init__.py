"""Test and benchmark scaffolding that is no part of the ``ddai`` package.

``support.fakes`` (fake OpenAI/Gemini servers) and ``support.fakes_search`` (a fake search
service) serve over aiohttp, a dev extra, so they live here rather than in the library;
``support.page_images``, ``support.verl_dump`` and ``support.tiny_vlm`` make test inputs (slide
images for a text corpus, verl rollout dumps, a tiny Qwen2-VL) that nothing in the package uses;
the other modules are references and checks only tests (and benches) call: ``query_table``
(the views over an in-memory table), ``plan_reference``, ``golden_rank``, ``sampling_reference``,
``learning_gain``, ``legend_check``, ``page_data``, ``fetch_rows``, ``turns`` and
``ddai_funnel`` (DDAI's round logs and first bucketing from ../shared). Tests import them as ``support.*``
(pytest puts ``tests/`` on the path through ``tests/conftest.py``); benchmarks insert ``tests/``
themselves and start servers with ``support.fakes.spawn``.
"""
