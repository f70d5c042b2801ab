"""CPU kernels: LSTM, GRU and RNN (input projection as one GEMM over all steps, then the recurrence). Imports nothing from jitort."""
