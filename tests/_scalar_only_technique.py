"""A technique module written for scalars only (it branches on a numeric plan value).

Used by tests/test_search_vector.py: the search must notice that this module does not
accept arrays for ``plan.zero``, evaluate that parameter per value in Python, and still
return exactly what the scalar estimate returns.
"""


def apply(c, model, system, plan, F=None):
    if plan.zero >= 3:                       # a Python branch on a number: ambiguous on arrays
        c["time"]["iteration"] = c["time"]["iteration"] * 1.5
