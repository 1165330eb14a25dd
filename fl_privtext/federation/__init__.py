"""Flower adapters (the only package that imports flwr): ClientApp, ServerApp, the eavesdropping Grid, the runner."""
