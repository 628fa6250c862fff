//! The `tenancy-hub` binary: parses the command line and hands over to the library.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = tenancy_hub::cli::Cli::parse_args();
    tenancy_hub::cli::init_logging(&cli.log);
    match cli.command.execute().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", tenancy_hub::cli::error_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
