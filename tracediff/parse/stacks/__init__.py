"""Launch stacks: the host call stack of each GPU launch, walked by a C module (_stack_walk.c)
over the nsys and Kineto readers' stack tables.
"""
