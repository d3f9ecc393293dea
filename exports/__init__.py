"""What users see: the command line (cli), text (text), workbooks (workbook) and plots (plots)."""
