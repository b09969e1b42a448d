"""`sgl_kernel.speculative`: imported by SGLang's tree reconstruction for speculative decoding."""

from sgl_kernel._missing import speculative_only

reconstruct_indices_from_tree_mask = speculative_only("speculative.reconstruct_indices_from_tree_mask")
