"""Test and benchmark scaffolding that is no part of the ``ddai`` package.

``support.fakes`` (fake OpenAI/Gemini servers) and ``support.fakes_search`` (a fake search
service) serve over aiohttp, a dev extra, so they live here rather than in the library;
``support.page_images`` and ``support.verl_dump`` make test inputs (slide images for a text
corpus, verl rollout dumps) that nothing in the package uses. Tests import them as ``support.*``
(pytest puts ``tests/`` on the path through ``tests/conftest.py``); benchmarks insert ``tests/``
themselves and start servers with ``support.fakes.spawn``.
"""
