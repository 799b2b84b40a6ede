/**
 * Imports every channel backend so each registers its context (./index.ts).
 * One line per backend folder; a backend that cannot run here still
 * registers and answers isViable() === false. The pipe layer imports this
 * file, so every agent sees the same set.
 */
import "./cma/index.js";
import "./cuda_ipc/index.js";
import "./cuda_staging/index.js";
import "./nccl/index.js";
import "./shm/index.js";
import "./tcp/index.js";
import "./ucx/index.js";
