"""Hang diagnosis across ranks, hang reports and their resolution, incidents (one cause, its
consequences) and the Python stacks they carry."""
