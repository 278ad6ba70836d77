# Copyright (c) 2023, Amazon.com. All Rights Reserved

"""
Package containing public kernels for Neuron Kernel Interface (NKI).

Kernels here are also available in the `neuronxcc.nki.kernels` namespace, and they 
are synced with this repository on every Neuron SDK release. 

https://github.com/aws-neuron/nki-samples
"""
