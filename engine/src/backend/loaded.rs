//! A value held on whichever backend it was made on, one variant per backend this build has:
//! the one list of backends that the model kinds (`Model`'s weights, Whisper's weights and
//! encoded windows, a vision projector's weights) dispatch over.

use super::{Backend, BackendError, CpuBackend, Device};

/// What a model kind keeps on a backend: `On<B>` on backend `B`.
pub trait PerBackend {
    type On<B: Backend>;
}

/// `F`'s value on one of the built backends.
pub enum OnBackend<F: PerBackend> {
    Cpu(F::On<CpuBackend>),
    /// The CUDA kernels run by the CPU execution harness (tests of the kernel backend).
    #[cfg(feature = "sim")]
    Sim(F::On<super::kernel::SimBackend>),
    #[cfg(feature = "cuda")]
    Cuda(F::On<super::kernel::CudaBackend>),
}

/// `$body` with `$m` bound to the value, whichever backend holds it; with `$wrap`, also bound
/// to the same variant's constructor (of any `OnBackend`), to keep a result on that backend.
macro_rules! on_backend {
    ($value:expr, $m:ident => $body:expr) => {
        match $value {
            $crate::backend::OnBackend::Cpu($m) => $body,
            #[cfg(feature = "sim")]
            $crate::backend::OnBackend::Sim($m) => $body,
            #[cfg(feature = "cuda")]
            $crate::backend::OnBackend::Cuda($m) => $body,
        }
    };
    ($value:expr, $m:ident, $wrap:ident => $body:expr) => {
        match $value {
            $crate::backend::OnBackend::Cpu($m) => {
                let $wrap = $crate::backend::OnBackend::Cpu;
                $body
            }
            #[cfg(feature = "sim")]
            $crate::backend::OnBackend::Sim($m) => {
                let $wrap = $crate::backend::OnBackend::Sim;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::backend::OnBackend::Cuda($m) => {
                let $wrap = $crate::backend::OnBackend::Cuda;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

/// `$body` with `$a` and `$b` bound to two values on the same backend; `$other` when they are on
/// different ones.
macro_rules! on_same_backend {
    (($x:expr, $y:expr), ($a:ident, $b:ident) => $body:expr, else => $other:expr) => {
        match ($x, $y) {
            ($crate::backend::OnBackend::Cpu($a), $crate::backend::OnBackend::Cpu($b)) => $body,
            #[cfg(feature = "sim")]
            ($crate::backend::OnBackend::Sim($a), $crate::backend::OnBackend::Sim($b)) => $body,
            #[cfg(feature = "cuda")]
            ($crate::backend::OnBackend::Cuda($a), $crate::backend::OnBackend::Cuda($b)) => $body,
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}
pub(crate) use on_same_backend;

/// The backends themselves.
pub struct Backends;

impl PerBackend for Backends {
    type On<B: Backend> = B;
}

/// The backend of `device`: a one-line error when this build lacks it, or when the driver,
/// NVRTC or the GPU is missing.
pub fn open(device: Device) -> Result<OnBackend<Backends>, BackendError> {
    match device {
        Device::Cpu => Ok(OnBackend::Cpu(CpuBackend::new())),
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => Ok(OnBackend::Cuda(super::kernel::CudaBackend::open(n)?)),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(BackendError::NotBuilt(device)),
    }
}

/// The simulated GPU: the CUDA kernels run by the CPU execution harness.
#[cfg(feature = "sim")]
pub fn simulated() -> OnBackend<Backends> {
    OnBackend::Sim(super::kernel::SimBackend::new())
}
