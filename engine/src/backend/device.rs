//! The device a model runs on, named once on the command line or in a request (`cpu`, `cuda`,
//! `cuda:N`) and parsed here, the one place that knows the spelling.

use std::fmt;
use std::str::FromStr;

/// A compute device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU (SIMD kernels chosen at run time, rayon threads).
    #[default]
    Cpu,
    /// CUDA GPU number N (`cuda` is `cuda:0`).
    Cuda(u32),
}

impl Device {
    /// Whether this build can run models on the device (CUDA: built with the `cuda` feature;
    /// whether a GPU is there is known only when it is opened).
    pub fn is_built(self) -> bool {
        match self {
            Device::Cpu => true,
            Device::Cuda(_) => cfg!(feature = "cuda"),
        }
    }
}

/// Device work this process has issued so far: kernel launches and transfers (uploads,
/// downloads, copies, fills), over every device; zeros in a build without device kernels, and
/// for work on the CPU, which issues none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceWork {
    pub launches: u64,
    pub transfers: u64,
}

impl DeviceWork {
    pub fn now() -> DeviceWork {
        #[cfg(any(feature = "sim", feature = "cuda"))]
        {
            let i = kernels::Issued::now();
            DeviceWork { launches: i.launches, transfers: i.transfers }
        }
        #[cfg(not(any(feature = "sim", feature = "cuda")))]
        DeviceWork::default()
    }

    /// The work issued since `earlier`.
    pub fn since(earlier: DeviceWork) -> DeviceWork {
        let now = DeviceWork::now();
        DeviceWork { launches: now.launches - earlier.launches, transfers: now.transfers - earlier.transfers }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A device name that is none of `cpu`, `cuda`, `cuda:N`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown device {0:?} (expected cpu, cuda or cuda:N)")]
pub struct DeviceParseError(pub String);

impl FromStr for Device {
    type Err = DeviceParseError;

    fn from_str(s: &str) -> Result<Device, DeviceParseError> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| DeviceParseError(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_print_back() {
        assert_eq!("cpu".parse(), Ok(Device::Cpu));
        assert_eq!("cuda".parse(), Ok(Device::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(Device::Cuda(3)));
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
        assert_eq!(Device::Cpu.to_string(), "cpu");
        for bad in ["", "gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:x", "CPU", "cuda:99999999999", "cuda: 1"] {
            let e = bad.parse::<Device>().unwrap_err();
            assert_eq!(e.to_string(), format!("unknown device {bad:?} (expected cpu, cuda or cuda:N)"));
        }
        assert!(Device::Cpu.is_built());
        assert_eq!(Device::Cuda(0).is_built(), cfg!(feature = "cuda"));
    }
}
