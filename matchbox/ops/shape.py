"""(rules to come)"""
import torch


def stack(sequence, dim=0, dynamic=None):
    return torch.stack(sequence, dim)


def cat(sequence, dim=0):
    return torch.cat(sequence, dim)
