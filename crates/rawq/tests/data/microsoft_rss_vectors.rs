// Shared by rawq's Toeplitz unit tests (src/flow/toeplitz.rs) and tests/emu/rss.rs through
// include!: one copy of the published table. (The device model keeps its own, in its own crate.)
// Verification tables of Microsoft's "Verifying the RSS Hash Calculation" (Windows driver
// docs, network/verifying-the-rss-hash-calculation.md in MicrosoftDocs/windows-driver-docs,
// https://learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation).
// Columns: destination, destination port, source, source port, hash of the addresses, hash
// with the TCP ports. The input order is source, destination, source port, destination port.
const V4: [(&str, u16, &str, u16, u32, u32); 5] = [
    (
        "161.142.100.80",
        1766,
        "66.9.149.187",
        2794,
        0x323e8fc2,
        0x51ccc178,
    ),
    (
        "65.69.140.83",
        4739,
        "199.92.111.2",
        14230,
        0xd718262a,
        0xc626b0ea,
    ),
    (
        "12.22.207.184",
        38024,
        "24.19.198.95",
        12898,
        0xd2d0a5de,
        0x5c2b394a,
    ),
    (
        "209.142.163.6",
        2217,
        "38.27.205.30",
        48228,
        0x82989176,
        0xafc7327f,
    ),
    (
        "202.188.127.2",
        1303,
        "153.39.163.191",
        44251,
        0x5d1809c5,
        0x10e828a2,
    ),
];
const V6: [(&str, u16, &str, u16, u32, u32); 3] = [
    (
        "3ffe:2501:200:3::1",
        1766,
        "3ffe:2501:200:1fff::7",
        2794,
        0x2cc18cd5,
        0x40207d3d,
    ),
    (
        "ff02::1",
        4739,
        "3ffe:501:8::260:97ff:fe40:efab",
        14230,
        0x0f0c461c,
        0xdde51bbf,
    ),
    (
        "fe80::200:f8ff:fe21:67cf",
        38024,
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        44251,
        0x4b61e985,
        0x02d1feef,
    ),
];
