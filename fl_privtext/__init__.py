"""fl_privtext: federated users who send locally-private text representations to an untrusted server."""

__version__ = "0.1.0"
