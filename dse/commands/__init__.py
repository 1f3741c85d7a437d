"""The commands of ``dse``, one module per group; :mod:`dse.cli` registers them on its typer app.

- :mod:`dse.commands.estimate`: ``dse estimate``;
- :mod:`dse.commands.techniques`: ``dse rok``, ``dse offload-compare``, ``dse chiplet-scaling``;
- :mod:`dse.commands.catalog`: ``dse list``, ``dse show``;
- :mod:`dse.commands.validation`: ``dse validate``, ``dse calibrate``, ``dse measure``;
- :mod:`dse.commands.search`: ``dse search``;
- :mod:`dse.commands.options`: the flags' choice types and the flag -> plan-field helpers they share.

Each module imports only typer at load time; everything heavier is imported inside the command.
"""
