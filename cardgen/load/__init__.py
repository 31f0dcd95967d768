"""The load engine: Locust drives streaming requests at a server and records every one of them.

Only this package imports locust/gevent (which monkey-patch the process on import): import
``cardgen.load.stage`` (or another module of this package) only in a process meant to generate load.
"""
