//! `engine-cli info`: TEMPORARY placeholder.
#[derive(clap::Args)]
pub struct InfoArgs {
    pub file: std::path::PathBuf,
    #[arg(long)]
    pub json: bool,
}
pub fn run(_args: InfoArgs) -> anyhow::Result<()> { anyhow::bail!("not yet") }
