"""Loss kernels: each algorithm's loss, its value and its gradient with respect to the
network outputs, written once over an array namespace (``pytorchrl.agent.accel.xp``).

The reference algorithm calls a kernel with ``xp=TORCH`` and ``grad=False``: autograd
differentiates the value. The numpy engine calls it with ``xp=NUMPY`` and back-propagates
the returned gradient by hand through the networks; the fused torch loss calls it with
``xp=TORCH`` outside autograd. A term added to a kernel (value and gradient, side by side)
reaches every path; tests/unit/test_accel_parity.py checks the gradient against autograd.
"""
