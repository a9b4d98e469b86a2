"""Training engines: one model (policy, value or reward) with its optimizer, behind one interface per backend."""
