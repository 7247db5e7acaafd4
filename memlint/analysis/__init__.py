"""What the code means, one owner per fact: names and imports, the traversal's
context (scopes, loops, grad mode, bindings), devices, autograd values, and the
functions and calls of a module. Rules ask these; they ask nothing above them."""
