"""Operator bulk operations: their rules (OperationManager) and the runner that carries them out.
"""
