"""Exits 0 without writing the output TSV."""


def main() -> None:
    print("done, nothing written", flush=True)


if __name__ == "__main__":
    main()
