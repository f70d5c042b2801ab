"""CPU kernels: scans and selections: CumSum, CumProd, ArgMax, ArgMin, TopK, Hardmax. Imports nothing from jitort."""
