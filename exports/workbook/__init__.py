"""Excel workbooks whose every derived number is a live formula: the printer, the sheets, the names."""
