"""Trainable client-side encoders for Phase A (issue #12): models, local training with the papers' defences."""

from fl_privtext.encoders.inputs import TrainData
from fl_privtext.encoders.model import ModelSpec, PrivModel, build_model, load_state, trainable_state
from fl_privtext.encoders.train import client_generator, defense_mechanism, encode, evaluate, local_train

__all__ = ["ModelSpec", "PrivModel", "TrainData", "build_model", "client_generator", "defense_mechanism",
           "encode", "evaluate", "load_state", "local_train", "trainable_state"]
