"""CPU kernels: GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot. Imports nothing from jitort."""
