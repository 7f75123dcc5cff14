"""Iteration simulator: DDP with bucketed all-reduce overlap, mixed clusters, spot, K-FAC."""

from srift.simulate.prediction import Prediction
from srift.simulate.predictor import Predictor, predict

__all__ = ["Prediction", "Predictor", "predict"]
