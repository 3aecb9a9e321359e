"""Hardware profiles shipped with llmplan (data only): ``<name>/profile.yaml`` per device.

See ``hwprofiles/README.md`` for the schema and ``simulator.scenario.profiles`` for the loader.
"""
