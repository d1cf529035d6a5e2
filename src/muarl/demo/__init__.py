"""The learning demonstration: the paper's base / cold-start / RL table in miniature, on CPU, offline
(``muarl demo``; the full form is ``bench/learning_demo.py``). ``config`` holds its two forms, ``stages`` the
stages, ``run`` the order and resume, ``report`` the results."""
