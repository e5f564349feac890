"""KServe v2 pieces that cross process boundaries: tensor datatypes and the tensors a model declares."""
